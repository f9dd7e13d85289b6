-- A server setting, for the report.
SELECT current_setting($1)
