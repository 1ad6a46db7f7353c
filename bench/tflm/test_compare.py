#!/usr/bin/env python3
"""Unit tests of compare.py's pieces that need no TFLM build:
python3 bench/tflm/test_compare.py"""
import os
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402


def tag_records(data, count):
    """A shard function whose output shows which records it saw, in order."""
    return bytes(data[k * 3] for k in range(count))


class DiffTest(unittest.TestCase):
    outs = [((1, 4), np.dtype(np.int8))]

    def test_identical_outputs_have_no_difference(self):
        a = np.arange(-8, 8, dtype=np.int8).tobytes()
        d = compare.diff(a, a, self.outs, 4)
        self.assertEqual(d, {"differing_bytes": 0, "differing_values": 0, "differing_records": 0,
                             "max_abs_diff": 0, "differing_argmax": 0})

    def test_counts_values_records_and_argmax(self):
        x = np.array([[1, 2, 3, 4], [5, 6, 7, 8], [0, 0, 9, 0]], np.int8)
        y = x.copy()
        y[0, 0] = -1  # off by 2, argmax unchanged
        y[2, 0] = 10  # argmax moves from 2 to 0; off by 10
        y[2, 1] = 1
        d = compare.diff(x.tobytes(), y.tobytes(), self.outs, 3)
        self.assertEqual(d, {"differing_bytes": 3, "differing_values": 3, "differing_records": 2,
                             "max_abs_diff": 10, "differing_argmax": 1})

    def test_size_mismatch_is_reported_not_compared(self):
        self.assertIn("error", compare.diff(b"\0" * 8, b"\0" * 4, self.outs, 2))

    def test_int16_values_are_compared_as_values(self):
        outs = [((1, 2), np.dtype(np.int16))]
        x = np.array([[256, 0]], np.int16)
        y = np.array([[257, 0]], np.int16)
        d = compare.diff(x.tobytes(), y.tobytes(), outs, 1)
        self.assertEqual((d["differing_bytes"], d["differing_values"], d["max_abs_diff"]), (1, 1, 1))


class ShardTest(unittest.TestCase):
    def test_shards_cover_every_record_in_order(self):
        count, rec = 7, 3
        data = bytes(b for k in range(count) for b in (k, 100, 200))
        for jobs in (1, 2, 3, 7):
            out = compare.sharded(tag_records, data, count, rec, jobs)
            self.assertEqual(list(out), list(range(count)), f"jobs={jobs}")


if __name__ == "__main__":
    unittest.main()
