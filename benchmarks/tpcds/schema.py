"""The 24 TPC-DS tables: column lists (as ``tpcgen-cli tpcds`` 4.0.0 writes them) and primary keys.

``TABLES`` maps a table to ``(ddl, primary_key)``: the DDL column list is what
``IncrementalFlow.register_source`` and PostgreSQL's CREATE TABLE take.  The
fact tables are keyed as in the specification (item + ticket/order number;
inventory by date, item and warehouse), dimensions by their surrogate key.
"""

FACTS = ("store_sales", "store_returns", "catalog_sales", "catalog_returns", "web_sales", "web_returns",
         "inventory")

TABLES = {
    "call_center": ('cc_call_center_sk INT NOT NULL, cc_call_center_id TEXT NOT NULL, cc_rec_start_date DATE, '
        'cc_rec_end_date DATE, cc_closed_date_sk INT, cc_open_date_sk INT, cc_name TEXT, cc_class TEXT, '
        'cc_employees INT, cc_sq_ft INT, cc_hours TEXT, cc_manager TEXT, cc_mkt_id INT, cc_mkt_class TEXT, '
        'cc_mkt_desc TEXT, cc_market_manager TEXT, cc_division INT, cc_division_name TEXT, cc_company INT, '
        'cc_company_name TEXT, cc_street_number TEXT, cc_street_name TEXT, cc_street_type TEXT, '
        'cc_suite_number TEXT, cc_city TEXT, cc_county TEXT, cc_state TEXT, cc_zip TEXT, cc_country TEXT, '
        'cc_gmt_offset NUMERIC(5,2), cc_tax_percentage NUMERIC(5,2)',
        ['cc_call_center_sk']),
    "catalog_page": ('cp_catalog_page_sk INT NOT NULL, cp_catalog_page_id TEXT NOT NULL, cp_start_date_sk INT, '
        'cp_end_date_sk INT, cp_department TEXT, cp_catalog_number INT, cp_catalog_page_number INT, '
        'cp_description TEXT, cp_type TEXT',
        ['cp_catalog_page_sk']),
    "catalog_returns": ('cr_returned_date_sk INT, cr_returned_time_sk INT, cr_item_sk INT NOT NULL, cr_refunded_customer_sk '
        'INT, cr_refunded_cdemo_sk INT, cr_refunded_hdemo_sk INT, cr_refunded_addr_sk INT, '
        'cr_returning_customer_sk INT, cr_returning_cdemo_sk INT, cr_returning_hdemo_sk INT, '
        'cr_returning_addr_sk INT, cr_call_center_sk INT, cr_catalog_page_sk INT, cr_ship_mode_sk INT, '
        'cr_warehouse_sk INT, cr_reason_sk INT, cr_order_number BIGINT NOT NULL, cr_return_quantity INT, '
        'cr_return_amount NUMERIC(7,2), cr_return_tax NUMERIC(7,2), cr_return_amt_inc_tax NUMERIC(7,2), '
        'cr_fee NUMERIC(7,2), cr_return_ship_cost NUMERIC(7,2), cr_refunded_cash NUMERIC(7,2), '
        'cr_reversed_charge NUMERIC(7,2), cr_store_credit NUMERIC(7,2), cr_net_loss NUMERIC(7,2)',
        ['cr_item_sk', 'cr_order_number']),
    "catalog_sales": ('cs_sold_date_sk INT, cs_sold_time_sk INT, cs_ship_date_sk INT, cs_bill_customer_sk INT, '
        'cs_bill_cdemo_sk INT, cs_bill_hdemo_sk INT, cs_bill_addr_sk INT, cs_ship_customer_sk INT, '
        'cs_ship_cdemo_sk INT, cs_ship_hdemo_sk INT, cs_ship_addr_sk INT, cs_call_center_sk INT, '
        'cs_catalog_page_sk INT, cs_ship_mode_sk INT, cs_warehouse_sk INT, cs_item_sk INT NOT NULL, '
        'cs_promo_sk INT, cs_order_number BIGINT NOT NULL, cs_quantity INT, cs_wholesale_cost NUMERIC(7,2), '
        'cs_list_price NUMERIC(7,2), cs_sales_price NUMERIC(7,2), cs_ext_discount_amt NUMERIC(7,2), '
        'cs_ext_sales_price NUMERIC(7,2), cs_ext_wholesale_cost NUMERIC(7,2), cs_ext_list_price NUMERIC(7,2),'
        ' cs_ext_tax NUMERIC(7,2), cs_coupon_amt NUMERIC(7,2), cs_ext_ship_cost NUMERIC(7,2), cs_net_paid '
        'NUMERIC(7,2), cs_net_paid_inc_tax NUMERIC(7,2), cs_net_paid_inc_ship NUMERIC(7,2), '
        'cs_net_paid_inc_ship_tax NUMERIC(7,2), cs_net_profit NUMERIC(7,2)',
        ['cs_item_sk', 'cs_order_number']),
    "customer": ('c_customer_sk INT NOT NULL, c_customer_id TEXT NOT NULL, c_current_cdemo_sk INT, c_current_hdemo_sk '
        'INT, c_current_addr_sk INT, c_first_shipto_date_sk INT, c_first_sales_date_sk INT, c_salutation '
        'TEXT, c_first_name TEXT, c_last_name TEXT, c_preferred_cust_flag TEXT, c_birth_day INT, '
        'c_birth_month INT, c_birth_year INT, c_birth_country TEXT, c_login TEXT, c_email_address TEXT, '
        'c_last_review_date_sk INT',
        ['c_customer_sk']),
    "customer_address": ('ca_address_sk INT NOT NULL, ca_address_id TEXT NOT NULL, ca_street_number TEXT, ca_street_name TEXT,'
        ' ca_street_type TEXT, ca_suite_number TEXT, ca_city TEXT, ca_county TEXT, ca_state TEXT, ca_zip '
        'TEXT, ca_country TEXT, ca_gmt_offset NUMERIC(5,2), ca_location_type TEXT',
        ['ca_address_sk']),
    "customer_demographics": ('cd_demo_sk INT NOT NULL, cd_gender TEXT, cd_marital_status TEXT, cd_education_status TEXT, '
        'cd_purchase_estimate INT, cd_credit_rating TEXT, cd_dep_count INT, cd_dep_employed_count INT, '
        'cd_dep_college_count INT',
        ['cd_demo_sk']),
    "date_dim": ('d_date_sk INT NOT NULL, d_date_id TEXT NOT NULL, d_date DATE, d_month_seq INT, d_week_seq INT, '
        'd_quarter_seq INT, d_year INT, d_dow INT, d_moy INT, d_dom INT, d_qoy INT, d_fy_year INT, '
        'd_fy_quarter_seq INT, d_fy_week_seq INT, d_day_name TEXT, d_quarter_name TEXT, d_holiday TEXT, '
        'd_weekend TEXT, d_following_holiday TEXT, d_first_dom INT, d_last_dom INT, d_same_day_ly INT, '
        'd_same_day_lq INT, d_current_day TEXT, d_current_week TEXT, d_current_month TEXT, d_current_quarter '
        'TEXT, d_current_year TEXT',
        ['d_date_sk']),
    "household_demographics": ('hd_demo_sk INT NOT NULL, hd_income_band_sk INT, hd_buy_potential TEXT, hd_dep_count INT, '
        'hd_vehicle_count INT',
        ['hd_demo_sk']),
    "income_band": ('ib_income_band_sk INT NOT NULL, ib_lower_bound INT, ib_upper_bound INT',
        ['ib_income_band_sk']),
    "inventory": ('inv_date_sk INT NOT NULL, inv_item_sk INT NOT NULL, inv_warehouse_sk INT NOT NULL, '
        'inv_quantity_on_hand INT',
        ['inv_date_sk', 'inv_item_sk', 'inv_warehouse_sk']),
    "item": ('i_item_sk INT NOT NULL, i_item_id TEXT NOT NULL, i_rec_start_date DATE, i_rec_end_date DATE, '
        'i_item_desc TEXT, i_current_price NUMERIC(7,2), i_wholesale_cost NUMERIC(7,2), i_brand_id INT, '
        'i_brand TEXT, i_class_id INT, i_class TEXT, i_category_id INT, i_category TEXT, i_manufact_id INT, '
        'i_manufact TEXT, i_size TEXT, i_formulation TEXT, i_color TEXT, i_units TEXT, i_container TEXT, '
        'i_manager_id INT, i_product_name TEXT',
        ['i_item_sk']),
    "promotion": ('p_promo_sk INT NOT NULL, p_promo_id TEXT NOT NULL, p_start_date_sk INT, p_end_date_sk INT, p_item_sk'
        ' INT, p_cost NUMERIC(15,2), p_response_target INT, p_promo_name TEXT, p_channel_dmail TEXT, '
        'p_channel_email TEXT, p_channel_catalog TEXT, p_channel_tv TEXT, p_channel_radio TEXT, '
        'p_channel_press TEXT, p_channel_event TEXT, p_channel_demo TEXT, p_channel_details TEXT, p_purpose '
        'TEXT, p_discount_active TEXT',
        ['p_promo_sk']),
    "reason": ('r_reason_sk INT NOT NULL, r_reason_id TEXT NOT NULL, r_reason_desc TEXT',
        ['r_reason_sk']),
    "ship_mode": ('sm_ship_mode_sk INT NOT NULL, sm_ship_mode_id TEXT NOT NULL, sm_type TEXT, sm_code TEXT, sm_carrier '
        'TEXT, sm_contract TEXT',
        ['sm_ship_mode_sk']),
    "store": ('s_store_sk INT NOT NULL, s_store_id TEXT NOT NULL, s_rec_start_date DATE, s_rec_end_date DATE, '
        's_closed_date_sk INT, s_store_name TEXT, s_number_employees INT, s_floor_space INT, s_hours TEXT, '
        's_manager TEXT, s_market_id INT, s_geography_class TEXT, s_market_desc TEXT, s_market_manager TEXT, '
        's_division_id INT, s_division_name TEXT, s_company_id INT, s_company_name TEXT, s_street_number '
        'TEXT, s_street_name TEXT, s_street_type TEXT, s_suite_number TEXT, s_city TEXT, s_county TEXT, '
        's_state TEXT, s_zip TEXT, s_country TEXT, s_gmt_offset NUMERIC(5,2), s_tax_precentage NUMERIC(5,2)',
        ['s_store_sk']),
    "store_returns": ('sr_returned_date_sk INT, sr_return_time_sk INT, sr_item_sk INT NOT NULL, sr_customer_sk INT, '
        'sr_cdemo_sk INT, sr_hdemo_sk INT, sr_addr_sk INT, sr_store_sk INT, sr_reason_sk INT, '
        'sr_ticket_number BIGINT NOT NULL, sr_return_quantity INT, sr_return_amt NUMERIC(7,2), sr_return_tax '
        'NUMERIC(7,2), sr_return_amt_inc_tax NUMERIC(7,2), sr_fee NUMERIC(7,2), sr_return_ship_cost '
        'NUMERIC(7,2), sr_refunded_cash NUMERIC(7,2), sr_reversed_charge NUMERIC(7,2), sr_store_credit '
        'NUMERIC(7,2), sr_net_loss NUMERIC(7,2)',
        ['sr_item_sk', 'sr_ticket_number']),
    "store_sales": ('ss_sold_date_sk INT, ss_sold_time_sk INT, ss_item_sk INT NOT NULL, ss_customer_sk INT, ss_cdemo_sk '
        'INT, ss_hdemo_sk INT, ss_addr_sk INT, ss_store_sk INT, ss_promo_sk INT, ss_ticket_number BIGINT NOT '
        'NULL, ss_quantity INT, ss_wholesale_cost NUMERIC(7,2), ss_list_price NUMERIC(7,2), ss_sales_price '
        'NUMERIC(7,2), ss_ext_discount_amt NUMERIC(7,2), ss_ext_sales_price NUMERIC(7,2), '
        'ss_ext_wholesale_cost NUMERIC(7,2), ss_ext_list_price NUMERIC(7,2), ss_ext_tax NUMERIC(7,2), '
        'ss_coupon_amt NUMERIC(7,2), ss_net_paid NUMERIC(7,2), ss_net_paid_inc_tax NUMERIC(7,2), '
        'ss_net_profit NUMERIC(7,2)',
        ['ss_item_sk', 'ss_ticket_number']),
    "time_dim": ('t_time_sk INT NOT NULL, t_time_id TEXT NOT NULL, t_time INT, t_hour INT, t_minute INT, t_second INT,'
        ' t_am_pm TEXT, t_shift TEXT, t_sub_shift TEXT, t_meal_time TEXT',
        ['t_time_sk']),
    "warehouse": ('w_warehouse_sk INT NOT NULL, w_warehouse_id TEXT NOT NULL, w_warehouse_name TEXT, w_warehouse_sq_ft '
        'INT, w_street_number TEXT, w_street_name TEXT, w_street_type TEXT, w_suite_number TEXT, w_city TEXT,'
        ' w_county TEXT, w_state TEXT, w_zip TEXT, w_country TEXT, w_gmt_offset NUMERIC(5,2)',
        ['w_warehouse_sk']),
    "web_page": ('wp_web_page_sk INT NOT NULL, wp_web_page_id TEXT NOT NULL, wp_rec_start_date DATE, wp_rec_end_date '
        'DATE, wp_creation_date_sk INT, wp_access_date_sk INT, wp_autogen_flag TEXT, wp_customer_sk INT, '
        'wp_url TEXT, wp_type TEXT, wp_char_count INT, wp_link_count INT, wp_image_count INT, wp_max_ad_count'
        ' INT',
        ['wp_web_page_sk']),
    "web_returns": ('wr_returned_date_sk INT, wr_returned_time_sk INT, wr_item_sk INT NOT NULL, wr_refunded_customer_sk '
        'INT, wr_refunded_cdemo_sk INT, wr_refunded_hdemo_sk INT, wr_refunded_addr_sk INT, '
        'wr_returning_customer_sk INT, wr_returning_cdemo_sk INT, wr_returning_hdemo_sk INT, '
        'wr_returning_addr_sk INT, wr_web_page_sk INT, wr_reason_sk INT, wr_order_number BIGINT NOT NULL, '
        'wr_return_quantity INT, wr_return_amt NUMERIC(7,2), wr_return_tax NUMERIC(7,2), '
        'wr_return_amt_inc_tax NUMERIC(7,2), wr_fee NUMERIC(7,2), wr_return_ship_cost NUMERIC(7,2), '
        'wr_refunded_cash NUMERIC(7,2), wr_reversed_charge NUMERIC(7,2), wr_account_credit NUMERIC(7,2), '
        'wr_net_loss NUMERIC(7,2)',
        ['wr_item_sk', 'wr_order_number']),
    "web_sales": ('ws_sold_date_sk INT, ws_sold_time_sk INT, ws_ship_date_sk INT, ws_item_sk INT NOT NULL, '
        'ws_bill_customer_sk INT, ws_bill_cdemo_sk INT, ws_bill_hdemo_sk INT, ws_bill_addr_sk INT, '
        'ws_ship_customer_sk INT, ws_ship_cdemo_sk INT, ws_ship_hdemo_sk INT, ws_ship_addr_sk INT, '
        'ws_web_page_sk INT, ws_web_site_sk INT, ws_ship_mode_sk INT, ws_warehouse_sk INT, ws_promo_sk INT, '
        'ws_order_number BIGINT NOT NULL, ws_quantity INT, ws_wholesale_cost NUMERIC(7,2), ws_list_price '
        'NUMERIC(7,2), ws_sales_price NUMERIC(7,2), ws_ext_discount_amt NUMERIC(7,2), ws_ext_sales_price '
        'NUMERIC(7,2), ws_ext_wholesale_cost NUMERIC(7,2), ws_ext_list_price NUMERIC(7,2), ws_ext_tax '
        'NUMERIC(7,2), ws_coupon_amt NUMERIC(7,2), ws_ext_ship_cost NUMERIC(7,2), ws_net_paid NUMERIC(7,2), '
        'ws_net_paid_inc_tax NUMERIC(7,2), ws_net_paid_inc_ship NUMERIC(7,2), ws_net_paid_inc_ship_tax '
        'NUMERIC(7,2), ws_net_profit NUMERIC(7,2)',
        ['ws_item_sk', 'ws_order_number']),
    "web_site": ('web_site_sk INT NOT NULL, web_site_id TEXT NOT NULL, web_rec_start_date DATE, web_rec_end_date DATE,'
        ' web_name TEXT, web_open_date_sk INT, web_close_date_sk INT, web_class TEXT, web_manager TEXT, '
        'web_mkt_id INT, web_mkt_class TEXT, web_mkt_desc TEXT, web_market_manager TEXT, web_company_id INT, '
        'web_company_name TEXT, web_street_number TEXT, web_street_name TEXT, web_street_type TEXT, '
        'web_suite_number TEXT, web_city TEXT, web_county TEXT, web_state TEXT, web_zip TEXT, web_country '
        'TEXT, web_gmt_offset NUMERIC(5,2), web_tax_percentage NUMERIC(5,2)',
        ['web_site_sk']),
}
