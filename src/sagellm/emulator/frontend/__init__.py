"""The emulator's HTTP face: the server, the SageMaker runtime, the container routes, metrics, CloudWatch,
the endpoint the routes share, and the wire formats (calls, event stream, bodies). It drives `serving`, never
the reverse."""
