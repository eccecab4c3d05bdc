BinputJ`—ÀLÁ¹dÄx—ôîÿÊüBùÆ¥ŸK7i$…f·ˆÆ(A<VÄNŸàmUIíõÍÑÒ
¢Âê»Ñr ~¯hI`ÙP»lÜiéDµCÖ–ùSÉéIm …5äG¿“G