"""The server's input boundary: one reader for request bodies, one check of hosts and origins."""
