"""`engine view`: a local web app over run folders: runs, one run's models and comparisons, the tests × models
grid with filters, every model's attempts at one test side by side, two runs compared, and human labels.

Every figure comes from engine.analysis (the functions `engine analyze` calls); the page is static files in
`static/` (plain JavaScript, no build step, nothing fetched from elsewhere) that build the DOM with `textContent`.
"""
