/// Log shipping between replicas is built by a later issue.
/// This namespace exists so the product is declared from the start.
public enum Replicator {}
