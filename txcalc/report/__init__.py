"""Capacity reports: one question -> report.md, a self-contained report.html, PNG plots and
report.json (the numbers). matplotlib is imported only while plots are drawn."""

from .model import build_report
from .request import ReportRequest

__all__ = ["ReportRequest", "build_report"]
