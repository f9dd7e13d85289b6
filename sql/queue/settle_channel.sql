-- The channel settle hints are sent on (skiplock._settle_channel: the wake channel's name with
-- '_settle', sql/api/12_flows.sql), read with the wake channel's at every (re)connect.
SELECT skiplock._settle_channel()
