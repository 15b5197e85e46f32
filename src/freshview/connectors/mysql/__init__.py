"""MySQL and MariaDB: DSNs, result tables, the ``freshview`` control database and setup checks."""
