"""The command-line process imports TensorFlow with its native start-up lines kept off the
terminal (pipeprof/cli/quiet.py), so that pipeprof's own errors stay one line; a failed import
still shows what TensorFlow said."""

import os
import subprocess
import sys
import textwrap

import pytest

from tests.integration.conftest import REPO

QUIET_IMPORT = textwrap.dedent(
    """
    import importlib.util, sys
    from pipeprof.cli import quiet
    quiet.install()
    importlib.util.find_spec("tensorflow")  # a probe first, as the engine's choice makes
    import tensorflow
    print("imported", file=sys.stderr)
    """
)


def run(code: str, path: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (path, str(REPO)) if p)}
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # TensorFlow's start-up lines as a user gets them
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.horovod  # imports TensorFlow: seconds of CPU, the slow tier
def test_tensorflows_import_writes_nothing_to_stderr_once_quieted():
    bare = run("import tensorflow, sys; print('imported', file=sys.stderr)")
    quiet = run(QUIET_IMPORT)
    assert bare.returncode == 0 and quiet.returncode == 0, quiet.stderr
    assert bare.stderr.strip() != "imported", "TensorFlow printed nothing: the test shows nothing"
    assert quiet.stderr == "imported\n", quiet.stderr
    assert quiet.stdout == ""


def test_a_failed_import_shows_what_the_package_wrote_before_it_failed(tmp_path):
    """A package that writes to file descriptor 2 and then raises, under the name the finder
    quiets: its line reaches stderr after all, before the traceback."""
    package = tmp_path / "tensorflow"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import os\nos.write(2, b'native: no AVX on this CPU\\n')\nraise ImportError('broken')\n"
    )
    got = run(QUIET_IMPORT, str(tmp_path))
    assert got.returncode == 1
    assert got.stderr.startswith("native: no AVX on this CPU\n"), got.stderr
    assert "ImportError: broken" in got.stderr and "imported" not in got.stderr
    (package / "__init__.py").write_text("import os\nos.write(2, b'native: started\\n')\n")
    got = run(QUIET_IMPORT, str(tmp_path))
    assert got.returncode == 0 and got.stderr == "imported\n", got.stderr
