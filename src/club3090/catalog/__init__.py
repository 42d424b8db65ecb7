"""The curated catalog: shipped YAML data, a strict loader and frozen records.

``load_catalog()`` returns the shipped catalog (read once per process); ``load_catalog(root)``
reads a copy of the data files from a folder, uncached (tests, contributors checking edits).
"""

from __future__ import annotations

from .loader import load_catalog
from .model import (
                    Anchor,
                    ArchRow,
                    Catalog,
                    Correction,
                    DeliveryGap,
                    Drafter,
                    Engine,
                    EnginePin,
                    Gpu,
                    KvFormat,
                    Model,
                    Patch,
                    Profile,
                    ProfileRuntime,
                    VendoredOverlay,
                    WeightVariant,
)

__all__ = ["Anchor", "ArchRow", "Catalog", "Correction", "DeliveryGap", "Drafter", "Engine", "EnginePin", "Gpu",
           "KvFormat", "Model", "Patch", "Profile", "ProfileRuntime", "VendoredOverlay",
           "WeightVariant", "load_catalog"]
