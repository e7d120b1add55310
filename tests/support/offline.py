"""Code to prepend to a program run in a subprocess: any attempt to connect fails."""

from __future__ import annotations

NO_NETWORK = """
import socket

def refuse(*args, **kwargs):
    raise OSError("network disabled by the test")

socket.socket.connect = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
"""
