"""Units shared by every layer: bytes stay integers inside; GiB and MiB only when rendered."""

from __future__ import annotations

GiB = 1 << 30
MiB = 1 << 20
