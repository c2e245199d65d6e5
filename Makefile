# Allure report of a run: `make allure` renders the newest reports/out/*/allure-results (or
# RESULTS=DIR) to an HTML report beside it, with the Allure command line from npm (it needs
# node/npm and Java). The tool is installed once under .tools/allure.
ALLURE_DIR := .tools/allure
ALLURE := $(ALLURE_DIR)/node_modules/.bin/allure
RESULTS ?= $(shell ls -td reports/out/*/allure-results 2>/dev/null | head -1)
REPORT = $(patsubst %/,%,$(dir $(RESULTS)))/allure-report

.PHONY: allure
allure: $(ALLURE)
	@test -n "$(RESULTS)" || { echo "make allure: no reports/out/*/allure-results yet: run ./scripts/main.sh (or brokerconf suite) first, or give RESULTS=DIR" >&2; exit 2; }
	$(ALLURE) generate --clean "$(RESULTS)" -o "$(REPORT)"
	@echo "report: $(REPORT)/index.html  (serve it: $(ALLURE) open $(REPORT))"

$(ALLURE):
	npm install --prefix $(ALLURE_DIR) --no-audit --no-fund allure-commandline@2
