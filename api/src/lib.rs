//! gpufair API types.
