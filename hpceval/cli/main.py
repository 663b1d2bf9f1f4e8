"""The ``hpceval`` command. Subcommands load on first use so ``--help`` stays fast.

Only click is imported here: pandas, submitit, jinja2 and YAML load inside the command that
needs them.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from hpceval._version import __version__

# name -> (module, attribute, one-line help). The help text lives here so that listing the
# commands (``--help``, shell completion) imports nothing.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "submit": ("hpceval.cli.run_cmds", "submit", "Validate, render and submit a run to Slurm."),
    "run": ("hpceval.cli.run_cmds", "submit", "Alias of submit (NeMo Evaluator's name)."),
    "render": ("hpceval.cli.run_cmds", "render", "Print the job scripts submit would send."),
    "config": ("hpceval.cli.config_cmds", "config", "Show the resolved configuration."),
    "ls": ("hpceval.cli.ls_cmds", "ls", "List tasks, runs, checkpoint watches or site profiles."),
    "status": ("hpceval.cli.track_cmds", "status", "State and progress of runs."),
    "info": ("hpceval.cli.track_cmds", "info", "Paths, job ids, script and config of a run."),
    "logs": ("hpceval.cli.track_cmds", "logs", "Print or follow job, server and harness logs."),
    "kill": ("hpceval.cli.track_cmds", "kill", "Cancel every job of a run."),
    "resume": ("hpceval.cli.track_cmds", "resume", "Resubmit the unfinished work of a run."),
    "watch": ("hpceval.cli.watch_cmds", "watch", "Evaluate each new checkpoint of a training "
              "run."),
    "results": ("hpceval.cli.results_cmds", "results", "Results table across runs."),
    "compare": ("hpceval.cli.compare_cmds", "compare", "Run A vs run B per task: difference, "
                "interval, paired test."),
    "gate": ("hpceval.cli.compare_cmds", "gate", "GO / NO-GO / INCONCLUSIVE for B against A "
             "under a policy (exit 0/1/3)."),
    "report": ("hpceval.cli.results_cmds", "report", "HTML score-vs-step report of a watch."),
    "export": ("hpceval.cli.results_cmds", "export", "Export results (JSON/CSV, MLflow, W&B)."),
    "stage": ("hpceval.cli.stage_cmds", "stage", "Pre-fetch images and data for offline nodes."),
    "tasks": ("hpceval.cli.stage_cmds", "tasks", "Manage the task catalogue (discover)."),
    "doctor": ("hpceval.cli.doctor_cmds", "doctor", "Check a site from the login node (and "
               "--on-node, one compute node)."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        spec = COMMANDS.get(cmd_name)
        if spec is None:
            return None
        module, attr, _ = spec
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_text) for name, (_, _, help_text) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        """The one handler of hpceval's errors: every command's HpcevalError ends here, as one
        message (a config error: one line per issue) and the error's own exit status."""
        from hpceval.errors import ConfigError, HpcevalError

        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            for issue in exc.issues:
                click.echo(f"hpceval: config error: {issue}", err=True)
            ctx.exit(exc.exit_code)
        except HpcevalError as exc:
            click.ClickException(str(exc)).show()  # "Error: ..." as click's own errors
            ctx.exit(exc.exit_code)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hpceval")
def cli() -> None:
    """Evaluate LLMs on Slurm clusters: one allocation per model, harnesses in containers.

    Start with `hpceval ls profiles`, then `hpceval config show RUN.yaml` and
    `hpceval render RUN.yaml`. Shell completion: eval "$(_HPCEVAL_COMPLETE=bash_source hpceval)".
    """


def main() -> None:
    cli(prog_name="hpceval")


if __name__ == "__main__":
    main()
