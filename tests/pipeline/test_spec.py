"""The pipeline file: statements read into specs; every refusal names the line and column."""

import pytest

from freshview.pipeline.spec import PipelineError, parse_pipeline

SHOP = """-- a shop
CREATE SOURCE orders (o_id INT PRIMARY KEY, o_customer INT, amount NUMERIC(10,2))
  WITH (connector = 'nats', url = 'nats://127.0.0.1:4222', subject = 'shop.orders', format = 'debezium_json');
CREATE VIEW totals AS SELECT o_customer, SUM(amount) AS total FROM orders WHERE note <> ';' GROUP BY o_customer;
CREATE SINK totals_out FROM totals WITH (connector = 'nats', url = 'nats://127.0.0.1:4222', subject = 'shop.totals',
                                         format = 'debezium_json');
SET updating_ttl = '1 hour';
SET update_aggregate_flush_interval = '1 second';
"""


def test_the_issue_example_reads_into_sources_views_sinks_and_settings():
    spec = parse_pipeline(SHOP)
    orders = spec.sources["orders"]
    assert orders.schema.names == ("o_id", "o_customer", "amount") or list(orders.schema.names) == [
        "o_id", "o_customer", "amount"]
    assert orders.schema.primary_key == ("o_id",)
    assert orders.options == {"connector": "nats", "url": "nats://127.0.0.1:4222", "subject": "shop.orders",
                              "format": "debezium_json"}
    assert spec.views["totals"].sql == ("SELECT o_customer, SUM(amount) AS total FROM orders WHERE note <> ';' "
                                        "GROUP BY o_customer")
    assert spec.sinks["totals_out"].view == "totals" and spec.sinks["totals_out"].options["subject"] == "shop.totals"
    assert spec.settings == {"updating_ttl": "1 hour", "update_aggregate_flush_interval": "1 second"}


@pytest.mark.parametrize("text, message", [
    ("CREATE SOURCE o (a INT) WITH (connector = nats);", "line 1, column 43: option 'connector' takes a quoted"),
    ("CREATE SOURCE o (a FOO) WITH (connector = 'x');", "line 1, column 17: source 'o': unsupported column type"),
    ("CREATE SOURCE o (a INT);", "expected WITH"),
    ("CREATE SOURCE o (a INT) WITH (url = 'x');", "source 'o' needs WITH (connector"),
    ("CREATE SOURCE o (a INT) WITH (connector = 'x', format = 'avro');", "format 'avro' is not supported"),
    ("\n\nSET foo = 1;", "line 3, column 5: unknown setting 'foo'"),
    ("DROP TABLE x;", "line 1, column 1: expected CREATE SOURCE, CREATE VIEW, CREATE SINK or SET"),
    ("CREATE TABLE x (a INT);", "expected SOURCE, VIEW or SINK after CREATE"),
    ("CREATE VIEW v AS SELECT 1;", "no CREATE SOURCE statement"),
    ("CREATE SOURCE o (a INT) WITH (connector = 'x');\nCREATE SINK s FROM nope WITH (connector = 'x');",
     "line 2: sink 's' reads 'nope'"),
    ("CREATE SOURCE o (a INT) WITH (connector = 'x');\nCREATE VIEW o AS SELECT a FROM o;",
     "line 2, column 13: the name 'o' is used twice"),
    ("CREATE SOURCE o (a INT) WITH (connector = 'x', connector = 'y');", "option 'connector' is given twice"),
    ("CREATE SOURCE o (a INT) WITH (connector = 'x');\nCREATE SINK s FROM o WITH (connector = 'x', schemas = 'yes');",
     "line 2, column 1: sink 's': schemas is true or false, not 'yes'"),
    ("CREATE SOURCE o (a INT) WITH (connector = 'x');\nCREATE SINK s FROM o WITH (connector = 'x', "
     "decimal_handling = 'exact');", "line 2, column 1: sink 's': decimal_handling 'exact' is not one of precise"),
])
def test_refusals_name_the_place_and_the_reason(text, message):
    with pytest.raises(PipelineError, match=None) as info:
        parse_pipeline(text, "shop.sql")
    assert message in str(info.value) and str(info.value).startswith("shop.sql")


def test_a_sinks_schemas_option_is_true_by_default_and_takes_bare_or_quoted_booleans():
    text = "CREATE SOURCE o (a INT) WITH (connector = 'x');\n" + "\n".join(
        f"CREATE SINK s{i} FROM o WITH (connector = 'x'{option});" for i, option in enumerate(
            ["", ", schemas = false", ", schemas = 'FALSE'", ", schemas = true, decimal_handling = 'string'"]))
    sinks = parse_pipeline(text).sinks
    assert [(s.schemas, s.decimal_handling) for s in sinks.values()] == [
        (True, "precise"), (False, "precise"), (False, "precise"), (True, "string")]
    assert sinks["s1"].options["schemas"] == "false"
