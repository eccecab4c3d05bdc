
BoutputJK¹‹¥{R{R¿–Ö×