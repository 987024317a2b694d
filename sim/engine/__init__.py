"""The SimPy simulation (the only package that imports simpy): replicas, traffic, routing, recording."""
