"""What pyproject.toml cannot say: the files an admin installs besides the package (the hooks,
the systemd units, the example config, the IAM policies, the dashboard) stay where a
checkout's reader finds them and are copied into the package as it is built, as
slurmscale/share/ (slurmscale/shipped.py lists them; `slurmscale install` puts them in
place)."""

import runpy
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
FILES = runpy.run_path(str(HERE / "slurmscale" / "shipped.py"))["FILES"]


class BuildWithShipped(build_py):
    def run(self) -> None:
        super().run()
        for name, source in FILES.items():
            target = Path(self.build_lib) / "slurmscale" / "share" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(HERE / source, target)


setup(cmdclass={"build_py": BuildWithShipped})
