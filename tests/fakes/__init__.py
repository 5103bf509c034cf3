"""Test doubles that speak the real wire protocols (HTTP fakes on loopback).

Import them from their modules (``tests.fakes.fake_openai``) so that each also runs with
``python -m``.
"""
