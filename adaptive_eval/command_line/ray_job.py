"""``python -m adaptive_eval.command_line.ray_job ADDRESS JOB_ID``: exit with a finished Ray
job's own code.

``ray job submit`` exits 1 whenever its job fails, whatever the entrypoint's exit code; a
scheduled job that must tell "the nightly raised an alert" (``adaptive-eval nightly`` exits 3)
from "the nightly failed" asks the job's record instead (``driver_exit_code``). The Kubernetes
CronJob (``deploy/kubernetes/nightly-cronjob.yaml``) runs this after ``ray job submit``, so its
pod exits with the nightly's own code and its pod failure policy can tell an alert (not retried)
from a failure (retried).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

#: A job that failed before its entrypoint returned a code (it could not start, was stopped).
EXIT_NO_CODE = 1


def job_exit_code(info: Any) -> int:
    """The entrypoint's exit code; 0 for a job that succeeded, 1 for one that left no code."""
    code = getattr(info, "driver_exit_code", None)
    if code is not None:
        return int(code)
    return 0 if str(getattr(info, "status", "")) in ("SUCCEEDED", "JobStatus.SUCCEEDED") else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        print("usage: python -m adaptive_eval.command_line.ray_job ADDRESS JOB_ID", file=sys.stderr)
        return 2
    from ray.job_submission import JobSubmissionClient

    address, job_id = args
    try:
        info = JobSubmissionClient(address).get_job_info(job_id)
    except Exception as error:  # the job's record is gone or the head is unreachable
        print(
            f"adaptive_eval.command_line.ray_job: no record of job {job_id!r}: {error}",
            file=sys.stderr,
        )
        return EXIT_NO_CODE
    return job_exit_code(info)


if __name__ == "__main__":
    sys.exit(main())
