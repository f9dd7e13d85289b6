-- One server setting, for the report's header.
SELECT current_setting($1)
