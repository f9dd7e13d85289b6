INSERT INTO pages (url, path, title, headings, body, last_fetched) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
