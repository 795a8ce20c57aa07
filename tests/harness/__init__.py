"""Tests of the stand-ins themselves: a fake must behave like the real thing."""
