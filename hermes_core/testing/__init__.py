"""Test kit for hermes_core and its plugins (fixtures and contract suites)."""
