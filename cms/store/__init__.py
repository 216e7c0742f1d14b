"""The pymongo boundary: the client, document conversions, error translation, one repository per collection."""
