//! `locks-leader`: filled in by a later issue.
