"""Reads a TensorBoard log directory with TensorBoard's own EventAccumulator and prints its
scalars as JSON: {"tag": [[step, value], ...], ...}. Used by the C++ metrics tests to check
that the event files we write are what TensorBoard reads."""
import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

acc = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
acc.Reload()
print(json.dumps({tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}))
