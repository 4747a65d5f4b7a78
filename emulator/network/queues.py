"""The memory a rank's connections take: the staging buffers a collective library keeps per peer.

A rank holding a connection to a peer keeps, for each channel it drives, a receive buffer of
``BUFFER_BYTES`` for that peer (and the peer one for it). So a rank's queue memory is
``peers x CHANNELS x BUFFER_BYTES`` — per peer *process* when every process connects to every
other (a flat all-to-all), per peer *node* when traffic across nodes goes through one proxy per
node. These are a library's defaults, not the network's: a figure to compare layouts by, stated as
an estimate.

* ``BUFFER_BYTES`` = 4 MiB: NCCL's documented default of ``NCCL_BUFFSIZE`` (4194304 bytes), the
  buffer "used by NCCL when communicating data between pairs of GPUs" (NCCL user guide,
  Environment Variables, NCCL_BUFFSIZE).
* ``CHANNELS`` = 16: estimate. NCCL picks the channel count per topology (bounded by
  ``NCCL_MIN_NCHANNELS``/``NCCL_MAX_NCHANNELS``); 16 is a typical figure for 8 GPUs behind NVSwitch,
  not a published constant.
"""

from __future__ import annotations

BUFFER_BYTES = 4 * 1024 * 1024      # NCCL_BUFFSIZE default (NCCL user guide): sourced
CHANNELS = 16                        # estimate: channels a rank drives per peer connection


def queue_bytes(peers: int, *, channels: int = CHANNELS, buffer_bytes: int = BUFFER_BYTES) -> int:
    """Staging memory (bytes) a rank keeps for ``peers`` connections."""
    return int(peers) * int(channels) * int(buffer_bytes)
