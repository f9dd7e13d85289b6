-- The console's database login (shown in the page footer).
SELECT session_user::text
