"""Several server replicas on one PostgreSQL and one Redis (DESIGN §8)."""
