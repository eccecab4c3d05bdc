
BinputJÑó|Ö¾™¶`c@;à?bu0·Þ›zO