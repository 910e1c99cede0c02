"""`tim-report` commands run in this process beside a local Ray the process started itself, for tests/test_ray.py.

A Ray driver can take its whole process down (its core worker's checks abort it), so the tests run their drivers
here, in a subprocess of their own: such a crash fails one test, not the pytest worker and every test after it.

    python tests/ray_driver.py '{"die": false, "commands": [["build", "run/", "-o", "site", "--executor", "ray"]]}'

prints one JSON list: per command, its exit code, stdout, stderr and whether the caller's Ray is still running.
"""

from __future__ import annotations

import json
import sys


def main(spec: dict) -> list[dict]:
    import ray
    from click.testing import CliRunner

    import tim_report.service.build as pipeline
    from tim_report.cli import main as cli

    if spec.get("die"):  # tasks on inputs named die*.npz kill their Ray worker (helpers.analyze_or_die)
        from helpers import analyze_or_die

        pipeline.analyze_file = analyze_or_die
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        out = []
        for args in spec["commands"]:
            res = CliRunner().invoke(cli, args)
            out.append({"exit_code": res.exit_code, "stdout": res.stdout, "stderr": res.stderr,
                        "ray_running": ray.is_initialized()})
        return out
    finally:
        ray.shutdown()


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
