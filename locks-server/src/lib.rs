//! `locks-server`: filled in by a later issue.
