"""scripts/ci_rocm.sh and its workflow on a machine with no ROCm and no GPU. The script's --dry-run prints
every step with the pinned versions and writes nothing; every command of docs/getting-started.md's "On AMD
Instinct" is one that the dry run prints (the same text, whitespace and line continuations aside), in the
script's order, with the same pinned rocm-systems commit; .github/workflows/rocm.yml runs the script
unchanged, and its image guard, run from the workflow's own text, refuses images that are not pinned."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "ci_rocm.sh"
GUIDE = ROOT / "docs" / "getting-started.md"
WORKFLOW = ROOT / ".github" / "workflows" / "rocm.yml"
# what the script reads from the environment; the tests run it with none of them set but OUT
SETTINGS = ("ROCM_PATH", "UNISHMEM_ROCM_ARCHS", "ROCSHMEM_REF", "ROCSHMEM_SRC", "ROCSHMEM_PREFIX", "OUT", "SIZES")
PINNED = ("ROCSHMEM_REF",)  # settings whose value the guide must give exactly as the script does
TORCH_INDEX = "python -m pip install torch --index-url https://download.pytorch.org/whl/rocmX.Y"


def script(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in SETTINGS and k != "PYTHON"}
    clean.update(OUT=str(tmp_path / "out"), **env)
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120, env=clean, stdin=subprocess.DEVNULL
    )


def normal(command: str) -> str:
    """One command as one line: line continuations and runs of white space become one space."""
    return " ".join(command.replace("\\\n", " ").split())


def joined(lines: list[str]) -> list[str]:
    """The commands of shell lines, one each (a line ending in a backslash goes on to the next)."""
    out, parts = [], []
    for line in lines:
        parts.append(line)
        if not line.rstrip().endswith("\\"):
            out.append(normal("\n".join(parts)))
            parts = []
    assert not parts, f"a command ends in a line continuation: {parts}"
    return out


def dry_commands(output: str) -> list[str]:
    """The dry run's commands: each starts after "$ " and goes on over its continuation lines."""
    out, lines = [], output.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("$ "):
            block = [lines[i][2:]]
            while block[-1].rstrip().endswith("\\"):
                i += 1
                block.append(lines[i])
            out.extend(joined(block))
        i += 1
    return out


def dry_settings(output: str) -> dict[str, str]:
    return dict(re.findall(r"^  ([A-Z_]+)=(\S*)", output, re.M))


def guide_section(text: str) -> str:
    match = re.search(r"^## On AMD Instinct\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, "docs/getting-started.md has a section '## On AMD Instinct'"
    return match.group(1)


def guide_commands(section: str) -> list[str]:
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", section, re.M | re.S):
        lines = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        commands.extend(joined(lines))
    return commands


def disagreements(section: str, output: str) -> list[str]:
    """What the guide's section says that the dry run does not: a command it does not print, one out of the
    script's order, a setting it does not read, a pinned value or commit other than the script's."""
    dry, settings = dry_commands(output), dry_settings(output)
    wrong, at = [], 0
    for command in guide_commands(section):
        if command in dry[at:]:
            at = dry.index(command, at) + 1
            continue
        if command in dry:
            wrong.append(f"out of the script's order: {command}")
            continue
        setting = re.fullmatch(r"(?:export )?([A-Z_][A-Z0-9_]*)=(.*)", command)
        if setting and setting[1] in settings:
            name, value = setting[1], setting[2].strip("\"'")
            if name not in PINNED or value == settings[name]:
                continue
        wrong.append(f"not a command of the dry run: {command}")
    ref = settings.get("ROCSHMEM_REF")
    wrong += [f"a commit other than ROCSHMEM_REF: {c}" for c in re.findall(r"\b[0-9a-f]{40}\b", section) if c != ref]
    return wrong


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> str:
    tmp = tmp_path_factory.mktemp("rocm")
    proc = script(tmp, "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not proc.stderr, proc.stderr
    assert not (tmp / "out").exists(), "the dry run wrote under OUT"
    return proc.stdout


def test_dry_run_prints_every_step_and_the_pinned_versions(dry_run):
    ref = re.search(r'^ROCSHMEM_REF="\$\{ROCSHMEM_REF:-([0-9a-f]{40})\}"$', SCRIPT.read_text(), re.M)
    assert ref, "scripts/ci_rocm.sh pins ROCSHMEM_REF to a full commit"
    settings = dry_settings(dry_run)
    assert settings["ROCSHMEM_REF"] == ref[1], settings
    assert settings["ROCM_PATH"] == "/opt/rocm" and settings["UNISHMEM_ROCM_ARCHS"] == "<gfx>", settings
    assert "rocSHMEM >= 3.3" in dry_run, dry_run
    commands = dry_commands(dry_run)
    steps = [
        TORCH_INDEX,
        "python -m pip install pybind11 scikit-build-core cmake ninja numpy",
        'export HIPCXX="$ROCM_PATH/llvm/bin/clang++"',
        'export ROCSHMEM_LIB_DIR="$ROCM_PATH/lib"',
        'git -C "$ROCSHMEM_SRC" fetch -q --depth 1 --filter=blob:none origin "$ROCSHMEM_REF"',
        'cmake --install "$ROCSHMEM_SRC/build"',
        'export ROCSHMEM_LIB_DIR="$ROCSHMEM_PREFIX/lib"',
        'python -c "import unishmem._rocshmem"',
        "python -m unishmem info",
        "python -m unishmem doctor --backend rocshmem",
        "UNISHMEM_BACKEND=rocshmem python -m unishmem run -n 2 examples/demo.py",
        "python -m pip install pytest",
    ]
    at = [commands.index(s) for s in steps]  # ValueError names a missing step
    assert at == sorted(at), list(zip(steps, at))
    cmake = next(c for c in commands if c.startswith("cmake -S "))
    for flag in ("-DCMAKE_POSITION_INDEPENDENT_CODE=ON", "-DUSE_IPC=ON", '-DGPU_TARGETS="$UNISHMEM_ROCM_ARCHS"'):
        assert flag in cmake.split(), cmake
    pip = next(c for c in commands if c.startswith("python -m pip install -v "))
    assert '--config-settings=cmake.define.rocshmem_DIR="$ROCSHMEM_LIB_DIR/cmake/rocshmem"' in pip.split(), pip
    assert any(c.startswith("UNISHMEM_BACKEND=rocshmem UNISHMEM_TEST_SIZES=2 python -m pytest ") for c in commands)
    assert sum(c.startswith("python -m unishmem compile unishmem.kernels.") for c in commands) == 3, commands
    assert dry_run.rstrip().endswith("(dry run)"), dry_run[-300:]


def test_the_guide_gives_the_dry_runs_commands(dry_run):
    section = guide_section(GUIDE.read_text())
    commands = guide_commands(section)
    for needed in (TORCH_INDEX, "python -m unishmem doctor --backend rocshmem", "-DUSE_IPC=ON", "-e ."):
        assert any(needed in c for c in commands), needed
    assert dry_settings(dry_run)["ROCSHMEM_REF"] in section
    assert disagreements(section, dry_run) == []


@pytest.mark.parametrize(
    "old, new",
    [
        ("fe14a430794f1fe5896a520aee5026b65cc9b5de", "2922ab56" + "0" * 32),  # another rocm-systems commit
        ("-DUSE_IPC=ON", "-DUSE_IPC=OFF"),
        (" -DBUILD_TESTING=OFF", ""),
        ("cmake.define.rocshmem_DIR=", "cmake.define.ROCSHMEM_DIR="),
        ("python -m unishmem doctor --backend rocshmem", "python -m unishmem doctor"),
        ("run -n 2 examples/demo.py", "run -n 4 examples/demo.py"),
        ("export HIPCXX=", "export HIP_CXX="),
    ],
)
def test_the_comparison_notices_a_guide_that_differs(dry_run, old, new):
    section = guide_section(GUIDE.read_text())
    assert old in section, old
    assert disagreements(section.replace(old, new, 1), dry_run), (old, new)


def test_the_comparison_notices_a_guide_out_of_order(dry_run):
    section = guide_section(GUIDE.read_text())
    doctor = "```bash\npython -m unishmem doctor --backend rocshmem\n```\n"
    assert doctor in section
    moved = doctor + section.replace(doctor, "")
    assert any(w.startswith("out of the script's order") for w in disagreements(moved, dry_run))


def test_the_real_run_stops_at_a_torch_that_is_not_rocms(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.version.hip:
        pytest.skip("torch is ROCm's build here: the real run would go on to install and build")
    proc = script(tmp_path, PYTHON=sys.executable)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "$ " + TORCH_INDEX in proc.stdout.splitlines(), proc.stdout
    assert re.search(r"^torch \S+ hip None GPUs 0$", proc.stdout, re.M), proc.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["last.log", "summary.txt"]
    assert proc.stdout == (tmp_path / "out" / "summary.txt").read_text()


# The workflow: read with a small parser of the block-style YAML it is written in (PyYAML is no dependency).


def workflow_steps(text: str) -> list[dict]:
    """The steps of the workflow's one job: each a dict of its keys, a scalar or block scalar (`|`) as a
    string, a mapping (env, with) as a dict."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "steps:") + 1

    def indent(line: str) -> int:
        return len(line) - len(line.lstrip())

    steps: list[dict] = []
    item = indent(next(line for line in lines[start:] if line.strip()))
    i = start
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#"):
            i += 1
            continue
        if indent(line) < item:
            break
        if indent(line) == item:
            assert line.lstrip().startswith("- "), line
            steps.append({})
            line = " " * (item + 2) + line.lstrip()[2:]
        key, _, value = line.strip().partition(":")
        value = value.strip()
        body = []
        i += 1
        while i < len(lines) and (not lines[i].strip() or indent(lines[i]) > item + 2):
            body.append(lines[i])
            i += 1
        while body and not body[-1].strip():
            body.pop()
        if value == "|":
            cut = min(indent(b) for b in body if b.strip())
            steps[-1][key] = "\n".join(b[cut:] for b in body) + "\n"
        elif not value:
            pairs = [b.strip().partition(":") for b in body if b.strip() and not b.lstrip().startswith("#")]
            steps[-1][key] = {k: v.strip() for k, _, v in pairs}
        else:
            assert not [b for b in body if b.strip()], f"{key}: a scalar with more lines"
            steps[-1][key] = value
    return steps


def step(name: str) -> dict:
    return next(s for s in workflow_steps(WORKFLOW.read_text()) if s.get("name") == name)


GUARD = "refuse an unpinned image"


def test_the_workflow_runs_the_script_unchanged_after_the_guard():
    text = WORKFLOW.read_text()
    assert re.search(r"^    if: \$\{\{ vars\.ROCM_IMAGE != '' \}\}$", text, re.M), "the job runs only with ROCM_IMAGE"
    assert re.search(r"^      image: \$\{\{ vars\.ROCM_IMAGE \}\}$", text, re.M)
    names = [s.get("name") for s in workflow_steps(text)]
    assert names.index(GUARD) == 0, names
    assert step("build and test with rocSHMEM")["run"] == "bash scripts/ci_rocm.sh"
    assert step(GUARD)["env"] == {"IMAGE": "${{ vars.ROCM_IMAGE }}"}
    assert "${{" not in step(GUARD)["run"], "the image goes to the shell through the environment only"


@pytest.mark.parametrize(
    "image, pinned",
    [
        ("repo/img:latest", False),
        ("repo/img", False),
        ("repo/img:", False),
        ("repo/img:rocm7.13-latest", False),
        ("localhost:5000/repo/img", False),  # a registry's port, no tag
        ("repo/img:7.13-ubuntu", True),
        ("registry.example:5000/repo/img:7.13-ubuntu", True),
        ("repo/img@sha256:" + "0123456789abcdef" * 4, True),
        ("repo/img:latest@sha256:" + "0123456789abcdef" * 4, True),  # the digest pins it
    ],
)
def test_the_workflows_image_guard(image, pinned):
    guard = step(GUARD)
    proc = subprocess.run(
        ["bash", "-e", "-c", guard["run"]], capture_output=True, text=True, env={**os.environ, "IMAGE": image}
    )
    assert (proc.returncode == 0) == pinned, (image, proc.stdout, proc.stderr)
    if not pinned:
        assert f"ROCM_IMAGE={image} " in proc.stdout, proc.stdout


def test_the_small_parser_reads_the_workflow_as_yaml_does():
    yaml = pytest.importorskip("yaml")
    job = next(iter(yaml.safe_load(WORKFLOW.read_text())["jobs"].values()))
    assert workflow_steps(WORKFLOW.read_text()) == job["steps"]
