"""Verify a plan on real hardware: fio and serving-benchmark jobs out, their results back in."""

from kvadvisor.verifyjobs.generate import VerifyOptions, verify_plan
from kvadvisor.verifyjobs.model import VerifyError, VerifyReport, VerifySet

__all__ = ["VerifyError", "VerifyOptions", "VerifyReport", "VerifySet", "verify_plan"]
