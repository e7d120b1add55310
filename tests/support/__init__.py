"""Helpers of the tests: fakes, servers, worker processes and shared fixtures; no tests here."""
