"""A module for `rollout.harness.preload` in the warm-parent tests: where it was imported."""

import os

PID = os.getpid()
