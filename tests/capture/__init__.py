"""Engine tests (make test-capture): a package, so its conftest is not a second `conftest`."""
