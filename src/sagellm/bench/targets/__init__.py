"""Where the bench sends load: the emulator on a local AWS, a SageMaker stack or existing endpoint, an
HTTP server."""
