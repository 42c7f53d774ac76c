-- The readable name of each capability and behavior class digest, where any span of the
-- data set recorded one beside it (model_requests.sql, class_names); of several names, the
-- least. Over the whole data set (filters do not apply): a digest names one class.
SELECT digest, min(name) AS name
FROM class_names
GROUP BY digest
ORDER BY digest;
