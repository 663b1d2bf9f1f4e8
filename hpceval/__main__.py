from hpceval.cli.main import main

main()
