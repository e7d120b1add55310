"""Helpers of the fault suite (tests/faults): failing upstreams, private servers, children."""
