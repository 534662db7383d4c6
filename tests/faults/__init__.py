"""Fault-injection testing (issue 26): a recorded history of a workload under a seeded nemesis, and a checker that
reads the history instead of asserting inline, so a failing run can be saved, re-checked and replayed."""
