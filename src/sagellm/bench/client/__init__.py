"""The bench's client: the workload it sends, the transports that send it, what comes back (one record
per request) and the summary of those records."""
