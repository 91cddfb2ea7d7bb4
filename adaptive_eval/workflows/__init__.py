"""The workflows a user runs: run, report, compare, nightly, import and export.

Each drives the layers below (campaign, the run loop, the outputs) and hands the outputs a
finished summary; nothing below imports a workflow.
"""
