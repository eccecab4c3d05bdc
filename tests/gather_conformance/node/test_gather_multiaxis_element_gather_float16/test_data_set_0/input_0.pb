
BinputJ‹¥xaRK¹ÅX{RÔ÷Ö×‡½¿–Mu