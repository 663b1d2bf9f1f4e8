"""Review F2: a profile or preset is trusted like ssh trusts its config. Another uid
(`runuser -u nobody`) drops a `local-dev.yaml` with `pre_commands` (and a `vllm-cpu` preset)
into a 1777 folder holding the victim's run file: searched last, it shadows nothing; a name found
only there is refused, naming the file and its owner, before anything is rendered or submitted.
The same for a group-writable folder on HPCEVAL_PROFILE_PATH, an `extends:` parent and an
explicit profile path; the user's own files in private folders, and the shipped ones, still
load."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from second_user import as_nobody, shared_scratch

from hpceval.config import load_run
from hpceval.config.errors import ConfigError
from hpceval.config.profiles import untrusted_reason
from hpceval.resources import site_configs_dir

HOSTILE = {"execution": {"type": "local", "gpus_per_node": 0,
                         "pre_commands": ["id > pwned-by-profile.txt"]}}


@pytest.fixture
def shared() -> Iterator[Path]:
    """A 1777 folder (like a shared scratch area) that nobody can write into."""
    with shared_scratch("hpceval-profiles-") as base:
        (base / "shared").mkdir()
        (base / "shared").chmod(0o1777)
        yield base / "shared"


def _plant(folder: Path, name: str, data: dict[str, object]) -> Path:
    staging = Path(tempfile.mkdtemp(dir="/tmp")) / name
    staging.parent.chmod(0o755)
    staging.write_text(yaml.safe_dump(data))
    staging.chmod(0o644)
    target = folder / name
    as_nobody("cp", str(staging), str(target))
    shutil.rmtree(staging.parent)
    assert target.stat().st_uid == 65534
    return target


def _run_file(folder: Path, profile: str = "local-dev", preset: str = "command") -> Path:
    run = folder / "run.yaml"
    run.write_text(yaml.safe_dump({
        "defaults": [{"execution": profile}, {"deployment": preset}],
        "execution": {"output_dir": str(folder / "out")},
        "deployment": {"command": "exec my-server --port $PORT", "served_model_name": "m"},
        "evaluation": {"tasks": [{"name": "ifeval"}]}}))
    return run


def test_a_profile_planted_next_to_the_run_file_is_refused_naming_file_and_owner(
        shared: Path) -> None:
    # the review's local-dev.yaml and deployment/command.yaml: searched last, they shadow
    # nothing (the shipped ones load, without the planted pre_commands)
    planted = _plant(shared, "local-dev.yaml", HOSTILE)
    (shared / "deployment").mkdir(mode=0o755)
    os.chown(shared / "deployment", 65534, 65534)
    _plant(shared / "deployment", "command.yaml", {"type": "command", "pwned": True})
    (resolved,) = load_run(_run_file(shared), check_environment=False)
    assert "pwned" not in repr(resolved)
    assert resolved.composed.source_of("execution.type").startswith("profile local-dev")
    # a name found only there: refused, naming the file and its owner
    planted.rename(shared / "only-here.yaml")
    with pytest.raises(ConfigError, match=r"refusing profile file .*only-here\.yaml: it is "
                                          r"owned by nobody \(uid 65534\)") as err:
        load_run(_run_file(shared, "only-here"), check_environment=False)
    assert str(shared / "only-here.yaml") in str(err.value)
    (shared / "deployment" / "command.yaml").rename(shared / "deployment" / "mine.yaml")
    with pytest.raises(ConfigError, match=r"refusing deployment file .*mine\.yaml: it is "
                                          r"owned by nobody"):
        load_run(_run_file(shared, preset="mine"), check_environment=False)


def test_the_users_own_profile_in_a_folder_others_can_write_is_refused_too(
        shared: Path) -> None:
    """Someone else could swap it (a group-writable project folder, a 1777 scratch folder)."""
    own = shared / "mine.yaml"
    own.write_text(yaml.safe_dump({"execution": {"type": "local", "gpus_per_node": 0}}))
    reason = untrusted_reason(own)
    assert reason is not None and "writable by other users (mode 1777)" in reason
    with pytest.raises(ConfigError, match="refusing profile file"):
        load_run(_run_file(shared, str(own)), check_environment=False)


def test_extends_and_profile_path_entries_get_the_same_rule(
        shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # HPCEVAL_PROFILE_PATH naming a group-writable folder: its profile is refused
    site = tmp_path / "site"
    site.mkdir()
    (site / "mysite.yaml").write_text(yaml.safe_dump({"extends": "local-dev"}))
    site.chmod(0o775)
    monkeypatch.setenv("HPCEVAL_PROFILE_PATH", str(site))
    private = tmp_path / "private"
    private.mkdir()
    with pytest.raises(ConfigError, match=r"mysite\.yaml: its folder .* is writable"):
        load_run(_run_file(private, "mysite"), check_environment=False)
    # a private profile whose extends: parent is planted next to the run file: the shipped
    # parent wins; a parent found only there is refused
    site.chmod(0o755)
    _plant(shared, "local-dev.yaml", HOSTILE)
    (near,) = load_run(_run_file(shared, "mysite"), check_environment=False)
    assert "pwned" not in repr(near)
    (site / "other.yaml").write_text(yaml.safe_dump({"extends": "planted-parent"}))
    (shared / "local-dev.yaml").rename(shared / "planted-parent.yaml")
    with pytest.raises(ConfigError, match=r"planted-parent\.yaml: it is owned by nobody"):
        load_run(_run_file(shared, "other"), check_environment=False)
    # the same private profile, its parent the shipped one: loads
    (resolved,) = load_run(_run_file(private, "mysite"), check_environment=False)
    assert "pwned" not in repr(resolved)


def test_shipped_profiles_are_trusted() -> None:
    for path in sorted(site_configs_dir().rglob("*.yaml")):
        assert untrusted_reason(path) is None, path


def _service_profiles(base: Path) -> Path:
    """A site's profile folder as Spack or a module tree installs it: owned by a service
    account (nobody here), 0755 folders, 0644 files."""
    site = base / "site-profiles"
    site.mkdir(mode=0o755)
    (site / "mysite.yaml").write_text(yaml.safe_dump({"extends": "local-dev"}))
    for path in (site, site / "mysite.yaml"):
        os.chown(path, 65534, 65534)
    (site / "mysite.yaml").chmod(0o644)
    return site


def _trust_file(folder: Path, text: str, mode: int = 0o644) -> Path:
    path = folder / "trusted-owners"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_site_names_the_accounts_that_own_its_profiles(
        shared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # hpc-admin-2 item 13: refused for every user but the service account, until root's
    # /etc/hpceval/trusted-owners names that account
    from hpceval.config import profiles

    site = _service_profiles(shared.parent)
    monkeypatch.setenv("HPCEVAL_PROFILE_PATH", str(site))
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    monkeypatch.setattr(profiles, "SITE_TRUST_FILE", etc / "trusted-owners")
    private = tmp_path / "private"
    private.mkdir()
    with pytest.raises(ConfigError, match=r"mysite\.yaml: it is owned by nobody") as err:
        load_run(_run_file(private, "mysite"), check_environment=False)
    assert "trusted-owners" in str(err.value)  # the fix says where a site names them
    trust = _trust_file(etc, "# the account Spack installs as\nnobody\n")
    (resolved,) = load_run(_run_file(private, "mysite"), check_environment=False)
    assert resolved.composed.source_of("execution.type").startswith("profile")
    # a trust file others can write names nobody: ignored, and the refusal says why
    trust.chmod(0o666)
    with pytest.raises(ConfigError, match=r"trusted-owners is ignored: it is writable by other"):
        load_run(_run_file(private, "mysite"), check_environment=False)
    trust.chmod(0o644)
    os.chown(trust, 65534, 65534)  # nor one root does not own
    with pytest.raises(ConfigError, match=r"trusted-owners is ignored: it is owned by nobody"):
        load_run(_run_file(private, "mysite"), check_environment=False)
    os.chown(trust, 0, 0)
    # a trusted account's file that others can write is still refused
    (site / "mysite.yaml").chmod(0o666)
    with pytest.raises(ConfigError, match=r"mysite\.yaml: it is writable by other users"):
        load_run(_run_file(private, "mysite"), check_environment=False)


def test_the_shipped_profiles_are_trusted_as_the_installation_is(shared: Path) -> None:
    # an hpceval installed by a service account (a Spack or module tree): its own profiles load
    # for every user who runs it; another account's file beside them does not
    root = shared.parent / "install"
    checkout = Path(__file__).resolve().parents[2]
    for name in ("hpceval", "site-configs", "templates"):
        shutil.copytree(checkout / name, root / name,
                        ignore=shutil.ignore_patterns("__pycache__"))
    for folder, dirs, files in os.walk(root):
        for name in [".", *dirs, *files]:
            os.chown(os.path.join(folder, name), 65534, 65534)
    root.chmod(0o755)
    stranger = root / "site-configs" / "planted.yaml"
    stranger.write_text("execution: {}\n")  # root's own: trusted anyway; make it another uid's
    os.chown(stranger, 1, 1)
    code = ("from hpceval.config.profiles import untrusted_reason as u\n"
            "from hpceval.resources import site_configs_dir as d\n"
            "print(u(d() / 'slurm.yaml')); print(u(d() / 'planted.yaml'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(root)},
                         cwd=shared).stdout.splitlines()
    assert out[0] == "None", out
    assert "owned by daemon (uid 1)" in out[1] or "owned by uid 1" in out[1], out
