"""NVTX_EVENTS.eventType values (Nsight's ENUM_NSYS_EVENT_TYPE) the loader tells apart."""

from __future__ import annotations

NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE = 34, 59, 60, 75
