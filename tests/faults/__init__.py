"""Fault injection (issue 28): real processes, real signals; each case drives traffic, injects one
fault and checks the invariant. Every case here is short (the folder runs in about a minute) and
runs with the suite."""
