#!/usr/bin/env python3
"""The PyTorch DDP peer with gradient compression: peer_torch.py (from shared/peers, which
stays outside the repository) run unchanged, but every DistributedDataParallel it builds
all-reduces its buckets as bf16 (`torch.distributed.algorithms.ddp_comm_hooks.default_hooks.
bf16_compress_hook`), the mode `octet train --grad-compress bf16` is measured against.

    torchrun ... bench/peer_ddp_compress.py PEER_TORCH_PY [peer_torch.py's arguments]
"""
import importlib.util
import sys

import torch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks


class CompressedDDP(torch.nn.parallel.DistributedDataParallel):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_comm_hook(None, default_hooks.bf16_compress_hook)


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    path = sys.argv[1]
    spec = importlib.util.spec_from_file_location("peer_torch", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: not a Python file (pass shared/peers/peer_torch.py)")
    peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer)
    torch.nn.parallel.DistributedDataParallel = CompressedDDP
    sys.argv = [path] + sys.argv[2:]
    peer.main()


if __name__ == "__main__":
    main()
