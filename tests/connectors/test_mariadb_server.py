"""The throwaway MariaDB server has the binlog settings freshview's reader needs."""

import pymysql


def test_server_settings(mysql_database):
    conn = pymysql.connect(**mysql_database)
    with conn.cursor() as cur:
        cur.execute("SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata, DATABASE()")
        assert cur.fetchone() == (1, "ROW", "FULL", "FULL", mysql_database["database"])
        cur.execute("CREATE TABLE t (a INT PRIMARY KEY)")
        cur.execute("INSERT INTO t VALUES (1)")
        conn.commit()
        cur.execute("SELECT @@gtid_binlog_pos")
        assert cur.fetchone()[0] != ""
    conn.close()
