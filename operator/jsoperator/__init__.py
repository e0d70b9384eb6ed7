"""jsoperator: a kopf operator reconciling Stream and Consumer resources against a JetStream server."""
