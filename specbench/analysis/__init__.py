"""Analysis of tidy records: gathering now; figures and tables build on the gathered table."""
