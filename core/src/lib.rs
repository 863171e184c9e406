//! gpufair policy core.
