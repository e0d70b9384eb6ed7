"""JetStream: streams, consumers and the $JS.API request handlers, built on the core broker."""
