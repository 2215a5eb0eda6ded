namespace servelab {}
