/// The projection layer (SQLite tables rebuilt from the log) is built by a later issue.
/// This namespace exists so the product is declared from the start.
public enum Projections {}
